"""Wire formats shared by the parts: the one SSE parser, the one Prometheus text reader, the
fingerprints of what a request said, and the engine's heartbeat read from a scrape."""
