"""Tests of jaxkit.splat."""
