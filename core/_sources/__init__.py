"""Where a task's workspace comes from when it is more than a few inline files: a git
repository at a commit, a local directory, or an archive (`source:` in a suite), and
the benchmark's test patch (`verify_patch:`) turned into the files it produces."""
