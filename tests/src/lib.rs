//! Multi-process integration tests (see `tests/`).
