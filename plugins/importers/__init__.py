"""Built-in importers: benchmark formats `evalctl import` turns into suites."""
