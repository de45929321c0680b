"""Root test configuration: shared fixtures live in tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.db",
    "tests.fixtures.temporal",
    "tests.fixtures.markers",
    "tests.fixtures.ordering",
]
