.PHONY: test bench fuzz

# The whole suite, as CI runs it.
test:
	scripts/test

# Benchmarks of the header codec and the store (against the test database).
bench:
	go run ./internal/cmd/withdb -- go test -run '^$$' -bench . -benchmem ./headers/ ./store/

# A short fuzzing session of the header codec.
fuzz:
	go test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./headers/
	go test -run '^$$' -fuzz FuzzRoundTrip -fuzztime 60s ./headers/
