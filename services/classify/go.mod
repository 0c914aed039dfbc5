module github.com/auditlens/auditlens/services/classify

go 1.26.8

require (
	github.com/auditlens/auditlens/lib v0.0.0
	github.com/auditlens/auditlens/proto v0.0.0
	github.com/goccy/go-yaml v1.19.2
	github.com/valyala/fastjson v1.6.10
	google.golang.org/protobuf v1.36.12
)

replace (
	github.com/auditlens/auditlens/lib => ../../lib
	github.com/auditlens/auditlens/proto => ../../proto
)
