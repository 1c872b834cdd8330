"""``bayou cluster``: brokers, controller and partition placement (admin API)."""
