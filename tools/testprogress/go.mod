module github.com/redlockd/redlockd/tools/testprogress

go 1.26
