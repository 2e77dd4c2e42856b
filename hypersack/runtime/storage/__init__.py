"""Storage: the embedded SQLite study store, its read-side queries, and the in-memory store of the
simulator."""
