"""Approver channels: email, webhooks, Slack. Used by activities and the API."""
