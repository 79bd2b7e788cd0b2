"""A shop's background work on setqueue: three kinds of task and an asyncio producer."""
