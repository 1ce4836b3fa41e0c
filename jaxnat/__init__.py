"""jaxnat: non-autoregressive and lexically constrained machine translation in JAX/Flax."""

__version__ = "0.1.0"
