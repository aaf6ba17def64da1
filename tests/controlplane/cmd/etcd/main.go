// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3 at the
// version pinned in ../../go.mod). `go install go.etcd.io/etcd/server/v3@v`
// cannot work (its go.mod has replace directives), so this wrapper calls the
// same entry point as upstream server/main.go.
//
// It lives in the same module as the Kubernetes binaries on purpose:
// k8s.io/kubernetes v1.36.3 itself requires go.etcd.io/etcd/server/v3 v3.6.8
// (indirectly, for its etcd test helpers) together with client/v3 v3.6.8, so
// one go.sum pins one consistent etcd for both the API server's client and
// the server, with no second module to keep in step.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
