//go:build tools

// The command this module builds; the build tag keeps this file out of every build but `go mod tidy`'s.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
