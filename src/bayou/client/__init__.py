"""Python clients for bayou's protocols."""

from bayou.client.rtes import RtesClient, RtesClientError

__all__ = ["RtesClient", "RtesClientError"]
