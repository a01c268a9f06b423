import evalctl


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(name="misgrouped_check",
                                grade=lambda c, w, r: evalctl.CheckResult(True)))
