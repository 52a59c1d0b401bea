from brokerctl.main import main

main()
