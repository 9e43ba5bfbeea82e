module example.com/redlock-example

go 1.19
