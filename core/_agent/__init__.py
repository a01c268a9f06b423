"""The agent under test: workspace tools, the loop, permissions and the ledger."""
