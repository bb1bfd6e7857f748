// gpuhost status integration tests (issue 5)
