import evalctl_dependency_that_is_not_installed  # noqa: F401
