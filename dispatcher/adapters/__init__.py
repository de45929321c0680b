"""Framework adapters (optional extras): each puts a framework's tool calls
through parkgate with the agent client. Import the one you use."""
