module github.com/auditlens/auditlens/tools/catalogue

go 1.26.8

require (
	github.com/auditlens/auditlens/lib v0.0.0
	github.com/goccy/go-yaml v1.19.2
)

replace github.com/auditlens/auditlens/lib => ../../lib
