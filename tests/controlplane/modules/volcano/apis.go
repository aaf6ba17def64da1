// Package volcano holds the import that keeps volcano.sh/apis (the API types
// controller-gen reads) in this module's graph; nothing is built from it.
package volcano

import _ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
