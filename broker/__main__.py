from broker.daemon_cli import main

main()
