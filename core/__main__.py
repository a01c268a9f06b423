from evalctl._cli import main

main()
