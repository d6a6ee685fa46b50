package pipeline

// ReadFilesAtOnce exposes readFilesAtOnce to the external tests.
const ReadFilesAtOnce = readFilesAtOnce
