"""The Kafka wire protocol (issue 17): a sans-IO codec over kio's generated message schemas.

``framing`` splits the byte stream into request frames and reads request headers, ``codes`` holds
the served APIs and versions and the error-code table, ``codec`` decodes request bodies and encodes
responses. The first-byte rule that lets V1 and Kafka share port 9092 is ``framing.sniff``.
"""
