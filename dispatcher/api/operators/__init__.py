"""The operator's surface: what the people running parkgate look at.

The audit pages (`routes_audit`: calls with filters, one call's timeline and
full output), the Temporal remote codec server (`routes_codec`, behind the
audit sign-in), liveness, readiness and Prometheus metrics (`routes_ops`; the
metrics themselves are shared, since every audience counts into them).

Imports `parkgate.api.shared` and nothing of `agents` or `people`
(.importlinter, "api-audiences").
"""
