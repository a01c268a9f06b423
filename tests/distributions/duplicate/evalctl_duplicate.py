import evalctl


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(name="word_count", grade=lambda c, w, r: evalctl.CheckResult(True)))
    register(evalctl.GraderSpec(name="always_true",
                                grade=lambda c, w, r: evalctl.CheckResult(True)))
