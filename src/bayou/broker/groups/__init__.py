"""Consumer groups: one model shared by every protocol."""
