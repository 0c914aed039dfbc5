// Package weekly builds the weekly upgrade-risk report from ClickHouse and sends it by e-mail.
package weekly
