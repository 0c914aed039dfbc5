// Package monitoring holds no code: its tests check the PrometheusRule beside them with
// Prometheus's own rule parser and alerting-rule evaluation.
package monitoring
