"""Tests for jaxkit.robust (credal DRO)."""
