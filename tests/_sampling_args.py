"""Bad sampling arguments shared by the generators' tests (decoding, memory, steering).

Every generator checks ``temperature`` and ``top_p`` with ``jaxkit._tokens``'
``check_sampling`` (concrete values) and ``guard_sampling`` (traced values), so the same
bad input must give the same error in each: :func:`assert_same_errors` compares a
generator's error with ``decoding.ar_generate``'s on the same backbone.
"""

import jax
import pytest

INF, NAN = float("inf"), float("nan")

# (keyword arguments, error, argument named): values whose messages must be equal
BAD_VALUES = [
    ({"temperature": INF}, "temperature"),
    ({"temperature": -INF}, "temperature"),
    ({"temperature": NAN}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": NAN}, "top_p"),
    ({"top_p": INF}, "top_p"),
]
# types and shapes: a TypeError naming the argument (the test suite's jaxtyping hook may
# raise it first, with its own message, where the annotation already excludes the value)
BAD_TYPES = [
    ({"temperature": "1"}, "temperature"),
    ({"temperature": [0.5, 1.0]}, "temperature"),
    ({"top_p": None}, "top_p"),
]
# traced (under jit): (temperature, top_p, message) of a run-time error
BAD_TRACED = [
    (INF, 0.9, "`temperature` must be finite"),
    (NAN, 0.9, "temperature"),
    (-0.5, 0.9, "temperature"),
    (1.0, 0.0, "top_p"),
    (1.0, 1.5, "top_p"),
    (1.0, NAN, "top_p"),
]


def assert_same_errors(gen, reference):
    """``gen(**kw)`` raises ``reference(**kw)``'s ValueError, word for word, per bad value.

    ``gen`` and ``reference`` raise a TypeError naming the argument for each bad type.
    """
    for kw, name in BAD_VALUES:
        with pytest.raises(ValueError, match=name) as want:
            reference(**kw)
        with pytest.raises(ValueError, match=name) as got:
            gen(**kw)
        assert str(got.value) == str(want.value), kw
    for kw, name in BAD_TYPES:
        for f in (gen, reference):
            with pytest.raises(TypeError, match=name):
                f(**kw)


def assert_traced_errors(jitted):
    """``jitted(temperature, top_p)`` (both traced) raises for each bad pair, runs on a good one."""
    jax.block_until_ready(jitted(1.0, 0.9))
    for t, p, match in BAD_TRACED:
        with pytest.raises(Exception, match=match):
            jax.block_until_ready(jitted(t, p))
