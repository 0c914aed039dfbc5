module github.com/auditlens/auditlens/services/report

go 1.26.8

require (
	github.com/auditlens/auditlens/lib v0.0.0
	github.com/auditlens/auditlens/proto v0.0.0
)

replace (
	github.com/auditlens/auditlens/lib => ../../lib
	github.com/auditlens/auditlens/proto => ../../proto
)
