"""wedgewatch: agent evaluations against self-hosted LLM servers that never mistake a wedged
server for a weak model."""

__version__ = "0.1.0"
