"""Adapters that put jaxkit layers into other JAX frameworks.

``jaxkit.interop.flax.to_nnx`` (extra ``flax``) and
``jaxkit.interop.haiku.to_haiku`` (extra ``haiku``). Each submodule is imported
explicitly, so a missing framework only fails its own import.
"""
