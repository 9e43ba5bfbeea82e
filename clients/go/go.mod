module redlock-agent.example/redlock

go 1.19
