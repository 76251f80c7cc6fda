"""Tests for jaxkit.retrieval (PST and the Shapley-Taylor engine)."""
