module github.com/auditlens/auditlens/services/ingest

go 1.26.8

require github.com/auditlens/auditlens/lib v0.0.0

require github.com/valyala/fastjson v1.6.10 // indirect

replace (
	github.com/auditlens/auditlens/lib => ../../lib
	github.com/auditlens/auditlens/proto => ../../proto
)
