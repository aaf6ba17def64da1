// Command kubectl is the upstream kubectl at the same release as the API
// server (k8s.io/kubectl v0.Y.Z, the staging twin of k8s.io/kubernetes
// vX.Y.Z pinned in ../../go.mod). The body follows upstream
// cmd/kubectl/kubectl.go (Apache-2.0) line for line.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Import to initialize client auth plugins.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
