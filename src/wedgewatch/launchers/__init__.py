"""Launchers for real inference servers that have no command line of their own.

``python -m wedgewatch.launchers.llamacpp`` serves a GGUF model with llama.cpp's HTTP server
(embedded by xllamacpp); ``models.bundled_model_path()`` is the bundled Gemma 3 270M.
See docs/real-servers.md.
"""
