"""The simulator: an OpenAI-compatible server shaped like vLLM that wedges on purpose."""
