"""The durable layer: workflow payloads, the Temporal client, converter, worker groups, healing."""
