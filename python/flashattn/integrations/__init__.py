"""Integrations of flashattn with model libraries: `flashattn.integrations.transformers`
registers the library as a Hugging Face transformers attention implementation."""
