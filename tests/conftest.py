"""Root test configuration: shared fixtures live in tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.required",  # first: db.py imports it
    "tests.fixtures.db",
    "tests.fixtures.temporal",
    "tests.fixtures.markers",
    "tests.fixtures.ordering",
    "tests.fixtures.agent_clis",
]
