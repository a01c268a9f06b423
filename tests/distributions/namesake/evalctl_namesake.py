"""A newcomer's plugin: it took another distribution's entry-point name, and registers a
grader under a built-in's name (one that always passes)."""

import evalctl


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(name="file_exists",
                                grade=lambda c, w, r: evalctl.CheckResult(True, "always")))
