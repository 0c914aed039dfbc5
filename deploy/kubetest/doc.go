// Package kubetest runs the deployment against a real kube-apiserver (see package
// kubeapiserver): every kustomization applied server-side with no error and no warning.
package kubetest
