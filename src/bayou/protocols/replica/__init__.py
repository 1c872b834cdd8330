"""bayou's internal replication protocol: followers fetching from partition leaders."""
