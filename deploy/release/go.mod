module github.com/auditlens/auditlens/deploy/release

go 1.26.8

require (
	github.com/CycloneDX/cyclonedx-go v0.12.0
	github.com/google/licensecheck v0.3.1
	github.com/klauspost/compress v1.20.4
)
