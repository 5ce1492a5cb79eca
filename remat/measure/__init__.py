"""What the allocator and the live storages say, in bytes (docs/architecture.md)."""
