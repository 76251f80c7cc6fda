"""Synthetic motion-caption generator and the HumanML3D/KIT-ML folder loader."""

import jax
import numpy as np
import pytest

from jaxkit import retrieval
from jaxkit.retrieval import _synthetic as S


@pytest.mark.parametrize("split", ["random", "compositional_test"])
def test_chunker_reads_the_phrases_from_the_words(split):
    # the rule chunker sees only tokens and mask; the generator's alignment is the oracle
    d = retrieval.synthetic_motion_text(200, key=jax.random.key(3), split=split)
    ids = S.chunk_phrases(d.tokens, d.token_mask)
    assert ids.dtype == np.int32 and np.array_equal(ids, d.word_segment)
    # a subject-less caption: its first word starts phrase 0
    toks = np.array([[S.VOCAB[w] for w in ("waves", "his", "left", "arm", "then", "kicks")]])
    assert S.chunk_phrases(toks, toks > 0).tolist() == [[0, 0, 0, 0, -1, 1]]


def test_synthetic_alignment_is_consistent():
    d = retrieval.synthetic_motion_text(40, key=jax.random.key(0), length=40)
    assert d.motion.shape == (40, 40, 22, 3) and np.all(np.isfinite(d.motion))
    for i in range(40):
        words = [S.WORDS[t] for t in d.tokens[i] if t]
        k = int(np.sum(d.seg_part[i] >= 0))
        assert sum(w == "then" for w in words) == k - 1
        f = d.seg_frames[i, :k]
        assert f[0, 0] == 0 and f[-1, 1] == 40 and np.all(f[1:, 0] == f[:-1, 1])
        for s in range(k):
            span = [S.WORDS[d.tokens[i, t]] for t in np.flatnonzero(d.word_segment[i] == s)]
            part = S.PARTS[d.seg_part[i, s]]
            assert " ".join(span).endswith(part)  # the phrase names its body part
            # the body part moves during its segment more than the other parts do
            f0, f1 = d.seg_frames[i, s]
            motion = np.abs(d.motion[i, f0:f1] - S.REST[None]).mean(axis=(0, 2))
            own = motion[list(S.PART_JOINTS[d.seg_part[i, s]])].mean()
            if S.ACTION_NAMES[d.seg_action[i, s]] != "turn":
                assert own > 2 * np.median(motion), (i, s)


def test_compositional_split_holds_out_pairs():
    held = (("raise", "kick"),)
    tr = retrieval.synthetic_motion_text(
        60, key=jax.random.key(1), split="compositional_train", held_out=held
    )
    te = retrieval.synthetic_motion_text(
        20, key=jax.random.key(2), split="compositional_test", held_out=held
    )
    assert not any(
        "raise" in c.split(" then ")[j] and "kick" in c.split(" then ")[j + 1]
        for c in tr.canonical
        for j in range(len(c.split(" then ")) - 1)
    )
    assert all("raise" in c and "kick" in c for c in te.canonical)


def test_loader(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        retrieval.load_motion_text(str(tmp_path / "absent"), "test")
    (tmp_path / "new_joints").mkdir()
    (tmp_path / "texts").mkdir()
    (tmp_path / "test.txt").write_text("000001\nM000001\n000002\n")
    np.save(tmp_path / "new_joints" / "000001.npy", np.zeros((40, 22, 3), np.float32))
    np.save(tmp_path / "new_joints" / "M000001.npy", np.ones((40, 22, 3), np.float32))
    (tmp_path / "texts" / "000001.txt").write_text(
        "a man waves#a/DET man/NOUN wave/VERB#0.0#0.0\nhe kicks#he/PRON kick/VERB#0.5#1.0\n"
    )
    (tmp_path / "texts" / "M000001.txt").write_text("a man waves#a/DET#0.0#0.0\n")
    got = retrieval.load_motion_text(str(tmp_path), "test")
    assert [g.id for g in got] == ["000001", "000001", "M000001"]  # 000002 has no files
    assert got[0].motion.shape == (40, 22, 3) and got[1].motion.shape == (10, 22, 3)
    assert got[1].caption == "he kicks" and got[0].tokens[1] == "man/NOUN"
    with pytest.raises(ValueError, match="split"):
        retrieval.load_motion_text(str(tmp_path), "dev")


def test_audit_bad_inputs():
    # wave-24 audit: a NaN noise was a NaN dataset, a negative one NumPy's "scale < 0"; a
    # float mask was an opaque jnp error
    key = jax.random.key(0)
    for noise, match in ((float("nan"), "noise"), (-1.0, "noise")):
        with pytest.raises(ValueError, match=match):
            retrieval.synthetic_motion_text(4, key=key, noise=noise)
    sim, w = np.zeros((2, 3)), np.zeros(2)
    with pytest.raises(TypeError, match="valid_a"):
        retrieval.cross_modal_stii(sim, w, np.zeros(3), valid_a=np.ones(2))
    with pytest.raises(TypeError, match="mask"):
        retrieval.cross_modal_value((sim, w, np.zeros(3)), np.ones(5))
