package devenv

import (
	"os/exec"
	"syscall"
)

// DiesWithParent makes the kernel kill cmd's process (SIGKILL) when this
// process dies, however it dies: a test binary that times out, panics or
// is killed takes its servers and relays with it instead of leaving them
// running. Call it before cmd.Start.
func DiesWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
