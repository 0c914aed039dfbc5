// Package kubetest runs the deployment against a real kube-apiserver (see package
// kubeapiserver): every kustomization and every preset of the Helm chart applied server-side
// with no error and no warning, the chart compared with the overlay of each preset, and the
// platform guides' apiserver flags started and checked to write the audit log.
package kubetest
