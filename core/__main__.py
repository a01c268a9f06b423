from evalctl.cli import main

main()
