from heterosim.cli import main

main()
