"""asyncio listeners binding the sans-IO codecs to sockets and the broker API."""
