"""The built-in suites, shipped with evalctl as package data so that `evalctl run
harness` works from a wheel as from a checkout (`evalctl suites` lists them)."""
